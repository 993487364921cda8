"""tasks of the calibration app."""
