"""admin of the judging app."""
