"""Building a model for a real provider, or for an OpenAI-compatible server (nothing is sent here)."""

import asyncio

from agentfsm import OpenAICompatible


async def main() -> None:
    # vLLM, llama.cpp, Ollama's /v1, LM Studio: `openai/<served name>` and the server's base URL.
    llm = OpenAICompatible(
        "openai/qwen2.5-vl-7b", api_base="http://127.0.0.1:8000/v1", vision=True, max_input_tokens=32768
    )
    print(llm.model, llm.api_base, llm.supports_vision, llm.input_limit)
    await llm.aclose()  # its connections (else its event loop's end closes them)


asyncio.run(main())
