"""admin of the calibration app."""
