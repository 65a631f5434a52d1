"""Mastra's advertised descriptions and input JSON schemas of the workspace tools, as its model receives them
(recorded from @mastra/core 1.71.0), so a prompt written for Mastra sees the same tools on Keel. Data only."""

from __future__ import annotations

from typing import Any

TOOL_SPECS: dict[str, dict[str, Any]] = {
    "mastra_workspace_read_file": {
        "description": "Read a file from the workspace filesystem. Text files come back as "
        "text — use offset/limit to read a line range from large files. "
        "Supported media files come back as a native file part you can view "
        "directly. Other binary files return only their metadata (path, "
        "size, mime type) since their raw contents are not useful to read.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": 'The path to the file to read (e.g., "data/config.json")'},
                "offset": {
                    "description": "Line number to start "
                    "reading from "
                    "(1-indexed). Only used "
                    "when reading text files; "
                    "ignored for media and "
                    "other binary files. "
                    "Defaults to line 1 if "
                    "omitted.",
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 9007199254740991,
                },
                "limit": {
                    "description": "Maximum number of lines "
                    "to read. Only used when "
                    "reading text files; "
                    "ignored for media and "
                    "other binary files. "
                    "Defaults to the end of "
                    "the file if omitted.",
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 9007199254740991,
                },
                "showLineNumbers": {
                    "default": True,
                    "description": "Prefix each "
                    "line with its "
                    "line number. "
                    "Only used when "
                    "reading text "
                    "files; ignored "
                    "for media and "
                    "other binary "
                    "files. Defaults "
                    "to true if "
                    "omitted.",
                    "type": "boolean",
                },
                "encoding": {
                    "description": "Usually omit this — "
                    "text files and "
                    "supported media are "
                    "handled automatically. "
                    "Pass `base64` or `hex` "
                    "to get the file's raw "
                    "bytes encoded as text "
                    "when you need to "
                    "inspect an unsupported "
                    "binary file that would "
                    "otherwise only return "
                    "metadata (e.g. "
                    "checking a file header "
                    "or magic bytes).",
                    "type": "string",
                    "enum": ["utf-8", "utf8", "base64", "hex", "binary"],
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_write_file": {
        "description": "Write content to a file in the workspace filesystem. Creates parent directories if needed.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": 'The path where to write the file (e.g., "data/output.txt")'},
                "content": {"type": "string", "description": "The content to write to the file"},
                "overwrite": {
                    "default": True,
                    "description": "Whether to overwrite the file if it already exists",
                    "type": "boolean",
                },
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_edit_file": {
        "description": "Edit a file by replacing specific text. The old_string must match "
        "exactly and be unique in the file.\n"
        "\n"
        "Usage:\n"
        "- Read the file first to get the exact text to replace.\n"
        "- By default, read file output includes line number prefixes "
        '(e.g., "     1→"). Ensure you preserve the exact indentation as it '
        "appears AFTER the arrow. Never include any part of the line number "
        "prefix in old_string or new_string.\n"
        "- Include enough surrounding context (multiple lines) to make "
        "old_string unique. If it still isn't unique, include more lines.\n"
        "- Use replace_all only when intentionally replacing all "
        "occurrences.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The path to the file to edit"},
                "old_string": {
                    "type": "string",
                    "description": "The exact text to find and replace. Must be unique in the file.",
                },
                "new_string": {"type": "string", "description": "The text to replace old_string with"},
                "replace_all": {
                    "default": False,
                    "description": "If true, replace all occurrences. If false (default), old_string must be unique.",
                    "type": "boolean",
                },
            },
            "required": ["path", "old_string", "new_string"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_list_files": {
        "description": "List files and directories in the workspace filesystem.\n"
        "Returns a compact tab-indented listing for efficient token "
        "usage.\n"
        "Options mirror common tree command flags for familiarity.\n"
        "\n"
        "Examples:\n"
        '- List workspace root: { path: "." }\n'
        '- Deep listing: { path: "src", maxDepth: 5 }\n'
        '- Directories only: { path: ".", dirsOnly: true }\n'
        '- Exclude node_modules: { path: ".", exclude: "node_modules" }\n'
        '- Find TypeScript files: { path: "src", pattern: "**/*.ts" }\n'
        '- Find config files: { path: ".", pattern: "*.config.{js,ts}" }\n'
        '- Multiple patterns: { path: ".", pattern: ["**/*.ts", '
        '"**/*.tsx"] }\n'
        "\n"
        "To list ALL files, omit the pattern parameter — do NOT pass "
        'pattern: "*".',
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"default": ".", "description": "Directory path to list", "type": "string"},
                "maxDepth": {
                    "default": 2,
                    "description": "Maximum depth to descend (default: 2). Similar to tree -L flag.",
                    "type": "number",
                },
                "showHidden": {
                    "default": False,
                    "description": 'Show hidden files starting with "." (default: false). Similar to tree -a flag.',
                    "type": "boolean",
                },
                "dirsOnly": {
                    "default": False,
                    "description": "List directories only, no files (default: false). Similar to tree -d flag.",
                    "type": "boolean",
                },
                "exclude": {
                    "description": 'Pattern to exclude (e.g., "node_modules"). Similar to tree -I flag.',
                    "type": "string",
                },
                "extension": {
                    "description": 'Filter by file extension (e.g., ".ts"). Similar to tree -P flag.',
                    "type": "string",
                },
                "pattern": {
                    "description": "Glob pattern(s) to "
                    "filter files. Omit "
                    "this parameter to list "
                    "all files (do NOT pass "
                    '"*"). Use "**/*.ext" '
                    "to match files "
                    "recursively across "
                    'directories. "*" only '
                    "matches within a "
                    "single directory level "
                    "(standard glob). Glob "
                    "patterns only filter "
                    "files — directories "
                    "are always shown to "
                    "preserve tree "
                    "structure. Examples: "
                    '"**/*.ts", '
                    '"src/**/*.test.ts", '
                    '"*.config.{js,ts}".',
                    "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                },
                "respectGitignore": {
                    "default": True,
                    "description": "Respect .gitignore in the listed directory (default: true).",
                    "type": "boolean",
                },
            },
            "additionalProperties": False,
        },
    },
    "mastra_workspace_delete": {
        "description": "Delete a file or directory from the workspace filesystem",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The path to the file or directory to delete"},
                "recursive": {
                    "default": False,
                    "description": "If true, delete "
                    "directories and their "
                    "contents recursively. "
                    "Required for non-empty "
                    "directories.",
                    "type": "boolean",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_file_stat": {
        "description": "Get file or directory metadata from the workspace. Returns "
        "existence, type, size, and modification time.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {"path": {"type": "string", "description": "The path to check"}},
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_mkdir": {
        "description": "Create a directory in the workspace filesystem",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "The path of the directory to create"},
                "recursive": {
                    "default": True,
                    "description": "Whether to create parent directories if they do not exist",
                    "type": "boolean",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_grep": {
        "description": "Search file contents using a regex pattern. Walks the filesystem and "
        "returns matching lines with file paths and line numbers.\n"
        "\n"
        "Usage:\n"
        '- Basic search: { pattern: "TODO" }\n'
        '- Regex: { pattern: "function\\s+\\w+\\(" }\n'
        '- Multiple terms: { pattern: "TODO|FIXME|HACK" }\n'
        '- Case-insensitive: { pattern: "error", caseSensitive: false }\n'
        '- Search in directory: { pattern: "import", path: "./src" }\n'
        '- Filter by glob: { pattern: "import", path: "**/*.ts" }\n'
        '- Combined path + glob: { pattern: "import", path: "src/**/*.ts" }\n'
        '- Multiple file types: { pattern: "import", path: "**/*.{ts,tsx,js}" }\n'
        '- Multiple directories: { pattern: "TODO", path: "{src,lib}/**/*.ts" }\n'
        '- With context: { pattern: "function", contextLines: 2 }',
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regex pattern to search for"},
                "path": {
                    "default": ".",
                    "description": "File, directory, or glob "
                    "pattern to search within "
                    '(default: "."). A plain path '
                    "searches that file or "
                    "directory. A glob pattern "
                    '(e.g., "**/*.ts", '
                    '"src/**/*.test.ts") filters '
                    "which files to search.",
                    "type": "string",
                },
                "contextLines": {
                    "default": 0,
                    "description": "Number of lines of context to include before and after each match (default: 0)",
                    "type": "number",
                },
                "maxCount": {
                    "description": "Maximum matches per file. "
                    "Moves on to the next file "
                    "after this many matches. "
                    "Similar to grep -m flag.",
                    "type": "number",
                },
                "caseSensitive": {
                    "default": True,
                    "description": "Whether the search is case-sensitive (default: true)",
                    "type": "boolean",
                },
                "includeHidden": {
                    "default": False,
                    "description": "Include hidden files "
                    "and directories (names "
                    'starting with ".") in '
                    "the search (default: "
                    "false)",
                    "type": "boolean",
                },
            },
            "required": ["pattern"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_execute_command": {
        "description": "Execute a shell command in the workspace sandbox.\n"
        "\n"
        "Examples:\n"
        '  "npm install && npm run build"\n'
        '  "ls -la src/"\n'
        "  \"cat config.json | jq '.database'\"\n"
        '  "cd /app && python main.py"\n'
        "\n"
        "Usage:\n"
        "- Commands run in a shell, so pipes, redirects, and chaining "
        "(&&, ||, ;) all work.\n"
        "- Always quote file paths that contain spaces (e.g., cd "
        '"/path/with spaces").\n'
        "- Use the timeout parameter (in seconds) to limit execution "
        "time. Behavior when omitted depends on the sandbox "
        "provider.\n"
        "- Optionally use cwd to override the working directory. "
        "Commands run from the sandbox's configured workingDirectory "
        "(or the provider default) if omitted.\n"
        "\n"
        "Set background: true to run long-running commands (dev "
        "servers, watchers) without blocking. You'll get a PID to "
        "track the process.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "command": {
                    "type": "string",
                    "description": "The shell command "
                    "to execute (e.g., "
                    '"npm install", '
                    '"ls -la src/", '
                    '"cat file.txt | '
                    'grep error")',
                },
                "timeout": {
                    "description": "Maximum execution time in seconds. Example: 60 for 1 minute.",
                    "type": ["number", "null"],
                },
                "cwd": {"description": "Working directory for the command", "type": ["string", "null"]},
                "tail": {
                    "description": "For foreground "
                    "commands: limit "
                    "output to the last N "
                    "lines, similar to "
                    "tail -n. Defaults to "
                    "200. Use 0 for no "
                    "limit.",
                    "anyOf": [
                        {"type": "integer", "minimum": -9007199254740991, "maximum": 9007199254740991},
                        {"type": "null"},
                    ],
                },
                "background": {
                    "description": "Run the "
                    "command in the "
                    "background. "
                    "Returns a PID "
                    "immediately "
                    "instead of "
                    "waiting for "
                    "completion. "
                    "Use "
                    "get_process_output "
                    "to check on it "
                    "later.",
                    "type": "boolean",
                },
            },
            "required": ["command"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_get_process_output": {
        "description": "Get the current output (stdout, stderr) and status of a "
        "background process by its PID.\n"
        "\n"
        "Use this after starting a background command with "
        "execute_command (background: true) to check if the "
        "process is still running and read its output.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pid": {
                    "type": "string",
                    "description": "The process ID returned when the background command was started",
                },
                "tail": {
                    "description": "Number of lines "
                    "to return, "
                    "similar to tail "
                    "-n. Positive or "
                    "negative returns "
                    "last N lines from "
                    "end. Defaults to "
                    "200. Use 0 for no "
                    "limit.",
                    "type": "integer",
                    "minimum": -9007199254740991,
                    "maximum": 9007199254740991,
                },
                "wait": {
                    "description": "If true, block "
                    "until the process "
                    "exits and return "
                    "the final output. "
                    "Useful for "
                    "short-lived "
                    "background "
                    "commands where "
                    "you want to wait "
                    "for the result.",
                    "type": "boolean",
                },
            },
            "required": ["pid"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_kill_process": {
        "description": "Kill a background process by its PID.\n"
        "\n"
        "Use this to stop a long-running background process that was "
        "started with execute_command (background: true). Returns the "
        "last 50 lines of output.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "pid": {"type": "string", "description": "The process ID of the background process to kill"}
            },
            "required": ["pid"],
            "additionalProperties": False,
        },
    },
    "mastra_workspace_index": {
        "description": "Index content for search. The path becomes the document ID in search results.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "path": {"description": "The document ID/path for search results", "type": "string"},
                "content": {"description": "The text content to index", "type": "string"},
                "metadata": {
                    "description": "Optional metadata to store with the document",
                    "type": "object",
                    "propertyNames": {"type": "string"},
                    "additionalProperties": {},
                },
            },
            "required": ["path", "content"],
            "additionalProperties": False,
        },
    },
}


def search_spec(modes: list[str]) -> dict[str, Any]:
    """`mastra_workspace_search` as Mastra advertises it: its `mode` enum lists the modes the workspace has."""
    return {
        "description": "Search indexed content in the workspace. Supports keyword (BM25), semantic (vector), and "
        "hybrid search modes.",
        "inputSchema": {
            "$schema": "http://json-schema.org/draft-07/schema#",
            "type": "object",
            "properties": {
                "query": {"description": "The search query string", "type": "string"},
                "topK": {"description": "Maximum number of results to return", "default": 5, "type": "number"},
                "mode": {"description": f"Search mode: {', '.join(modes)}", "type": "string", "enum": list(modes)},
                "minScore": {"description": "Minimum score threshold (0-1 for normalized scores)", "type": "number"},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
    }
