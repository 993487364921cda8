"""tasks of the annotation app."""
