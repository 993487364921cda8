"""selectors of the judging app."""
