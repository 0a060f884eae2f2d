"""Reproductions of the source documents' experiments (scripts behind ``dpkit reproduce``)."""
