"""No Celery tasks: leases expire lazily when a request reclaims them (see
ASSIGNMENT.md), so the annotation app needs no background sweeper."""
