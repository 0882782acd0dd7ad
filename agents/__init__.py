"""Thin Faust agents; each body calls one application function from app/."""
