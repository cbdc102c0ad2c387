"""What keeps one visitor from shutting the others out: what a request may bring, the door to
gradio's queue, and each question's own line.
"""
