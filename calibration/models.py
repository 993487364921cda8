"""Models of the calibration app (filled in by its issue; the app is wired in from the start)."""
