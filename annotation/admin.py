"""admin of the annotation app."""
