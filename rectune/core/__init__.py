"""The shared base, below everything: files and errors (``io``), output folders RecTune owns and
single files among a user's own (``outputs``, ``owned_files``), one process per output (``locks``),
escaping what is written for others (``escaping``), the git commit (``provenance``), and the scripts'
error handling and front door (``cli``, ``command``). Imports nothing else of RecTune.
"""
