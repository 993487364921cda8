"""services of the calibration app."""
