"""views of the calibration app."""
