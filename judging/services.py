"""services of the judging app."""
