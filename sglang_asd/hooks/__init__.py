"""How sglang-asd hooks SGLang, for both seam packages (``sglang_seams``: ASD; ``cpu_backend.seams``:
the CPU stand-in): a seam module declares what it hooks (``registry.Seam``), its package installs
it (``registry.install``: register with SGLang's ``HookRegistry``, apply, then check every target
and by-name binding), and a hook reads SGLang's call by parameter name (``arguments``). Imports
nothing of sglang-asd."""
