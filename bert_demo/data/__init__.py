"""Where text comes from and how it becomes BERT's examples: the named corpora and their parsers, documents of
sentences, sentence pairs masked as the paper masks them, labelled text for fine-tuning, and the cache of a corpus's
token ids. Imports the BERT itself (bert_demo.model, .tokenizer), nothing above.
"""
