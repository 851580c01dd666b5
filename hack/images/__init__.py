"""The project's container images, built locally and reproducibly (``python -m hack.images``)."""
