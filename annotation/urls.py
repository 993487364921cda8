"""HTML routes of the annotation app."""

app_name = "annotation"
urlpatterns: list = []
