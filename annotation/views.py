"""views of the annotation app."""
