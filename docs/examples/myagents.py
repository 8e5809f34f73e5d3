"""A module of your own agents for the command line: `agentfsm run --agent myagents:build "..."`."""

from agentfsm import ChatModel, Terminate, ToolCallAgent, tool


@tool
def word_count(text: str) -> int:
    """Count the words in `text`."""
    return len(text.split())


def build(llm: ChatModel) -> ToolCallAgent:
    """The agent `--agent myagents:build` runs, on the model the command line configured."""
    return ToolCallAgent(llm=llm, tools=[word_count, Terminate()], name="counter", max_steps=10)


if __name__ == "__main__":  # the same factory from Python, on a scripted model
    import asyncio

    from agentfsm.testing import ScriptedLLM, reply

    llm = ScriptedLLM(
        [
            reply(tool_calls=[("word_count", {"text": "to be or not"})]),
            reply("4 words.", tool_calls=[("terminate", {"status": "success"})]),
        ]
    )
    result = asyncio.run(build(llm).run("How many words in 'to be or not'?"))
    print(result.stop_reason, "-", result.output)
