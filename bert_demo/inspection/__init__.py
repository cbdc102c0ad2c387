"""Looking inside a model: the forward pass step by step, a pre-training example as training draws it, attribution,
neighbours, what fine-tuning changed, the figures and charts, and the model card. Imports training, the data and the
BERT itself; the app imports it.
"""
