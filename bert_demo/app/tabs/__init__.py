"""The app's tabs, one module each: its layout (`layout`), its events (`wire`) and the handlers they call, which the
tests call too. The Fine-tune tab has two: the experiment (`finetune`) and questions to its classifier
(`classifier`); `heads` holds what Fill-mask and Next sentence share."""
