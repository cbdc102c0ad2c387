"""How a BERT is trained: every setting of a run, the recipe, the loop every run shares and what it needs (device and
ranks, a time budget, the divergence guard, the timeline, saving), pre-training and fine-tuning on that loop, and
evaluation. Imports the data and the BERT itself, nothing above.
"""
