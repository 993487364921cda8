"""selectors of the annotation app."""
