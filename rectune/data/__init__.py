"""Data, below the benchmarks: rating and review readers for every MovieLens and Amazon layout
(``ratings``, ``movielens``, the out-of-core ``rating_store``), stratified samples (``sampling``), the
catalog and item KG (``catalog``), titles and answer parsing (``titles``, ``mentions``, ``completions``),
row checking (``rows``) and the embedded demo world (``demo_world``). Imports only ``rectune.core``.
"""
