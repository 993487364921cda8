"""tasks of the judging app."""
