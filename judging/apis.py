"""apis of the judging app."""
