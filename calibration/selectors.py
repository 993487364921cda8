"""selectors of the calibration app."""
