"""apis of the annotation app."""
