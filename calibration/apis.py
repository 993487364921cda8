"""apis of the calibration app."""
