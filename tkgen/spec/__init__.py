"""Specs as data: reading and schema-checking files (`loader`, `schema/`), the expression language (`expr`,
printed as Python by `pyexpr`), number formats and their codecs (`formats`), the typed model (`model`) and
its checks (`checks`), each variant's resolved tensor signatures (`signature`), the backward block's plan
(`autograd`), and what a spec value may become in generated code (`safety`)."""
