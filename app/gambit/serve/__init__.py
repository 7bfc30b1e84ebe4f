"""The local OpenAI-compatible server: Gambit's decoding for editors and scripts.

- ``jobs``: a request as a job on the engine's thread, and its figures;
- ``openai_api``: the HTTP API (Starlette);
- ``prometheus``: ``GET /metrics``;
- ``server``: uvicorn on a socket Gambit binds, in the foreground or on a thread.

Its address defaults are the settings' (``gambit.storage.settings``). The
package's own import is empty: the web stack (~0.1 s) loads only where served.
"""
