"""The `agentcore` backend: AWS Bedrock AgentCore Code Interpreter sessions (see sandboxes.py)."""

from .sandboxes import AgentCoreConfig, AgentCoreSandbox, AgentCoreSandboxes

__all__ = ["AgentCoreConfig", "AgentCoreSandbox", "AgentCoreSandboxes"]
