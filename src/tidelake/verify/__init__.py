"""Verification: a lake compared with its source or with the rows it must hold."""
