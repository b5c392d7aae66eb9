"""Fetching and running the validators of docker-compose.yml and k8s/ (see fetch.py)."""
