"""The app's state as parts that compose: the catalogue of models, the forms that read a visitor's settings, the runs
on disk and a visitor's uploads, each handed what it needs by the registry.
"""
