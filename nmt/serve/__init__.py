"""`nmt serve`: translation over HTTP with dynamic batching (Starlette on uvicorn, `nmt[serve]`)."""
