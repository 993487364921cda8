"""Models of the annotation app (filled in by its issue; the app is wired in from the start)."""
