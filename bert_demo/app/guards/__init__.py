"""What keeps one visitor from shutting the others out: who a request comes from, what a request may bring, the door to
gradio's queue, and each question's own line.
"""
