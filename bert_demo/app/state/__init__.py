"""The app's state as parts that compose: the catalogue of models, the latest answers kept by visitor, and the forms
that read a visitor's settings, each handed what it needs by the registry.
"""
