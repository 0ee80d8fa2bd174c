"""SGLang seams that exist only to serve on CPU through the stand-in (never on a GPU install): the
linear-layer and ``get_last_loc`` paths (``cpu_paths``), how SGLang starts its children
(``start_method``), the platform fact that keeps the ``intel_amx`` attention backend
(``platform``), and, opt-in, SGLang's speculative sampling verify on CPU (``sampling``). Their
environment switches are read in ``sglang_asd.cpu_backend.env``."""
