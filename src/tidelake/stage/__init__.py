"""Stager: JetStream pull consumer -> staged batch files + manifests."""
