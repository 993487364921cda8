"""views of the judging app."""
