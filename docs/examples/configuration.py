"""How the layers of the configuration combine: the file, then the environment, then flags."""

import os
from pathlib import Path

from agentfsm.cli.config import Settings
from agentfsm.errors import ConfigError

Path("agentfsm.toml").write_text(
    """
[llm]
model = "openai/gpt-4o-mini"
timeout = 30

[llm.coder]              # only for the agent named "coder"
model = "openai/qwen2.5-coder"
api_base = "http://127.0.0.1:8000/v1"

[agent]
max_steps = 20

[browser]
allowed_hosts = ["*.python.org"]
""",
    encoding="utf-8",
)

# A variable replaces one key of the file's section, not the whole section.
os.environ["AGENTFSM_LLM__TIMEOUT"] = "90"
# A list or a table is written as JSON.
os.environ["AGENTFSM_BROWSER__ALLOWED_HOSTS"] = '["docs.python.org", "peps.python.org"]'

# `overrides` is what the command line's flags set (`--max-steps 5`): over both.
settings = Settings.load(overrides={"agent": {"max_steps": 5}})
llm = settings.llm.model_dump()  # [llm] and [agent] are made from the options records: read them as data
print("model:", llm["model"], "| timeout:", llm["timeout"])
print("agent:", settings.agent.agent_kwargs(), "| allowed_hosts:", settings.browser.allowed_hosts)

coder = settings.llm_for("coder").model_dump()  # [llm] with [llm.coder] laid over it
print("coder:", coder["model"], coder["api_base"], "| timeout:", coder["timeout"])
print("search backends:", settings.search.backends, "(none: web_search contacts nothing)")

# A wrong value is one line: the key, the value, where it came from, what is allowed.
os.environ["AGENTFSM_AGENT__MAX_STEPS"] = "0"
try:
    Settings.load()
except ConfigError as exc:
    print(exc)

# One underscore instead of two would be ignored silently, so it is refused.
del os.environ["AGENTFSM_AGENT__MAX_STEPS"]
os.environ["AGENTFSM_LLM_MODEL"] = "openai/gpt-4o"
try:
    Settings.load()
except ConfigError as exc:
    print(exc)
