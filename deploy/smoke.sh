#!/usr/bin/env bash
# Smoke test of the crossfeed image, end to end, with a real container engine:
#
#   deploy/smoke.sh                 # from anywhere; builds ../Dockerfile, runs it, checks, cleans up
#
# 1. builds the image (docker if its engine answers `docker info`, else podman);
# 2. starts deploy/fake_upstream.py on the host (a tiny Chat Completions server streaming SSE);
# 3. runs the image seven times against it:
#    a. as built (uid 10001, the image's anonymous volume at /var/lib/crossfeed);
#    b. read-only: --read-only --tmpfs /tmp --tmpfs /var/lib/crossfeed (still uid 10001);
#    c. hardened: the same with --user 12345 --cap-drop ALL --security-opt no-new-privileges;
#    c2. workers: read-only as in b, with CROSSFEED_WORKERS=2 (a supervisor and two workers on one
#    port and one SQLite file; the startup line says so);
#    e. compose: the settings of deploy/docker-compose.yml's crossfeed service (deploy/crossfeed.toml
#    mounted read-only and --config, the key in CROSSFEED_INBOUND_KEYS, CROSSFEED_LOG_LEVEL=info,
#    --read-only --tmpfs /tmp, no-new-privileges, published on 127.0.0.1): also GET /metrics is
#    a 404 on the published port and answers on 9464 (metrics_port) inside the container;
#    f. readme: the read-only example of deploy/README.md for ENGINE, exactly as written there
#    (the key from the environment, --user 12345, the host by name) but for the published port,
#    the upstream's port, the image's tag, and `-d --name` and this machine's sandbox flags for
#    `--rm` (skipped with NETWORK=host, which the example does not use);
#    in each: /healthz answers, the image's HEALTHCHECK passes, (e, f) a request without the key
#    and one with a wrong key get 401, a streamed POST /v1/responses gets its events and ends with
#    response.completed, the stored response can be read back (GET /v1/responses/{id}), and
#    `ENGINE stop` (SIGTERM) ends the container with exit code 0;
#    d. an arbitrary uid that cannot write the data directory (--user 12345:12345, no tmpfs):
#    crossfeed must refuse to start (exit 2) with its plain message naming the uid and the fix.
# Containers, the fake upstream and temporary files are removed on exit, on failure too; the
# image is kept. Exit code 0 only if every check passed.
#
# Base image: python:3.12-slim is pulled if it can be; when no registry is reachable,
# deploy/make-base-image.sh makes localhost/debian-python:bookworm from Debian's packages (root
# and a Debian mirror needed) and the build uses that.
#
# Environment (all optional):
#   ENGINE=docker|podman     the engine (default: docker if `docker info` answers, else podman)
#   ENGINE_FLAGS="..."       global engine flags, e.g. "--storage-driver vfs" (podman)
#   PYTHON_IMAGE=ref         base image for the build (skips the pull / make-base-image.sh)
#   IMAGE=ref                tag of the image built (default localhost/crossfeed:smoke)
#   NETWORK=bridge|host      bridge (default): the container reaches the host by name (podman:
#                            host.containers.internal; docker: host.docker.internal with
#                            --add-host=host.docker.internal:host-gateway) and its port is
#                            published on 127.0.0.1; host: --network=host and 127.0.0.1
#   BUILD_CA_FILE=file       a CA bundle pip in the build must trust (a TLS-intercepting proxy);
#                            podman only (mounted with build -v, passed as PIP_CERT); default
#                            $PIP_CERT when it names a file
#   BUILD_ARGS="..."         more `build` arguments, e.g. "--build-arg PIP_INDEX_URL=https://mirror/simple"
#   SANDBOX_FLAGS=auto|none|"..."  podman only. auto (default): if a trivial container does not
#                            start, retry with what restricted machines need and use the first that
#                            works: --ulimit nofile=<hard>:<hard> --ulimit nproc=4096:4096 (podman as
#                            root asks for nofile=1048576 and an nproc limit above the hard
#                            limits, refused without CAP_SYS_RESOURCE:
#                            "setrlimit `RLIMIT_NOFILE`: Operation not permitted") and/or
#                            --runtime runc (crun: "cgroups in hybrid mode not supported").
#                            Anything else: those flags, as words ("--runtime" goes global).
#   NO_BUILD=1               use IMAGE as it is
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")
IMAGE=${IMAGE:-localhost/crossfeed:smoke}
NETWORK=${NETWORK:-bridge}
SANDBOX_FLAGS=${SANDBOX_FLAGS:-auto}
OFFICIAL_IMAGE=docker.io/library/python:3.12-slim
DEBIAN_IMAGE=localhost/debian-python:bookworm
MODEL=fake-model
[[ $NETWORK == bridge || $NETWORK == host ]] || { printf 'NETWORK must be bridge or host, not %s\n' "$NETWORK" >&2; exit 2; }

step() { printf '\n==> %s\n' "$*"; }
info() { printf '    %s\n' "$*"; }
ok() { printf '    ok: %s\n' "$*"; }
fail() { printf '\nSMOKE FAILED: %s\n' "$*" >&2; exit 1; }

for tool in curl python3; do
    command -v "$tool" >/dev/null 2>&1 || fail "$tool is needed on the host"
done

# -- engine ---------------------------------------------------------------------------------------
if [[ -z ${ENGINE:-} ]]; then
    if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
        ENGINE=docker
    elif command -v podman >/dev/null 2>&1; then
        ENGINE=podman
    else
        fail "no container engine: docker does not answer \`docker info\` and podman is not installed"
    fi
fi
# shellcheck disable=SC2206  # word lists on purpose
global=(${ENGINE_FLAGS:-})
run_extra=()  # flags of both `build` and `run` (ulimits)
# podman without systemd cannot schedule HEALTHCHECK timers and says so on every run/stop
# ("unable to get systemd connection ..."): those lines are dropped (the checks below run the
# HEALTHCHECK on demand); any other stderr line is shown.
engine() {
    "$ENGINE" "${global[@]}" "$@" 2> >(grep -v -e 'unable to get systemd connection' >&2)
}

# -- cleanup, on every exit -----------------------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/crossfeed-smoke.XXXXXX")
containers=()
upstream_pid=
cleanup() {
    local rc=$?
    set +e
    for c in "${containers[@]}"; do
        engine rm --force --volumes "$c" >/dev/null 2>&1
    done
    if [[ -n $upstream_pid ]] && kill -0 "$upstream_pid" 2>/dev/null; then
        kill "$upstream_pid" 2>/dev/null
        wait "$upstream_pid" 2>/dev/null
    fi
    rm -rf "$work"
    if [[ $rc -eq 0 ]]; then
        printf '\nSMOKE PASSED (%s, image %s)\n' "$ENGINE" "$IMAGE"
    else
        printf '    (cleaned up: %d container(s), the fake upstream, %s)\n' "${#containers[@]}" "$work" >&2
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

step "engine: $ENGINE ($(engine --version 2>&1 | head -1))${ENGINE_FLAGS:+, flags: $ENGINE_FLAGS}"

# -- base image -----------------------------------------------------------------------------------
if [[ -z ${NO_BUILD:-} ]]; then
    step "base image"
    if [[ -n ${PYTHON_IMAGE:-} ]]; then
        info "PYTHON_IMAGE=$PYTHON_IMAGE (given)"
    elif engine image inspect "$OFFICIAL_IMAGE" >/dev/null 2>&1 \
        || timeout 300 "$ENGINE" "${global[@]}" pull -q "$OFFICIAL_IMAGE" >"$work/pull.log" 2>&1; then
        PYTHON_IMAGE=$OFFICIAL_IMAGE
        info "using $PYTHON_IMAGE"
    else
        info "cannot pull $OFFICIAL_IMAGE: $(tail -1 "$work/pull.log" 2>/dev/null)"
        info "the base is $DEBIAN_IMAGE, made from Debian packages by deploy/make-base-image.sh (kept once made)"
        ENGINE=$ENGINE ENGINE_FLAGS=${ENGINE_FLAGS:-} IMAGE=$DEBIAN_IMAGE "$here/make-base-image.sh" 2>&1 \
            | sed 's/^/    | /' || fail "deploy/make-base-image.sh failed"
        PYTHON_IMAGE=$DEBIAN_IMAGE
    fi
    ok "base $PYTHON_IMAGE"
fi
probe_image=${PYTHON_IMAGE:-$IMAGE}

# -- what this machine needs to start a container (podman) -----------------------------------------
try_start() {  # try_start GLOBAL_FLAGS... -- RUN_FLAGS...: 0 if a trivial container runs
    local g=() r=()
    while [[ $# -gt 0 && $1 != -- ]]; do g+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    r=("$@")
    "$ENGINE" "${global[@]}" "${g[@]}" run --rm "${r[@]}" --entrypoint /bin/sh "$probe_image" -c true \
        >"$work/probe.log" 2>&1
}
if [[ $ENGINE == podman ]]; then
    step "podman: can a container start here?"
    hard_nofile=$(ulimit -Hn)
    [[ $hard_nofile == unlimited ]] && hard_nofile=1048576
    limits=(--ulimit "nofile=$hard_nofile:$hard_nofile" --ulimit nproc=4096:4096)
    runc=()
    command -v runc >/dev/null 2>&1 && runc=(--runtime runc)
    case $SANDBOX_FLAGS in
        none) ;;
        auto)
            if try_start --; then
                ok "yes, with podman's defaults"
            else
                info "no: $(grep -v 'systemd' "$work/probe.log" | tail -1)"
                found=
                candidates=("|${limits[*]}")  # global flags|run flags
                if [[ ${#runc[@]} -gt 0 ]]; then
                    candidates+=("${runc[*]}|" "${runc[*]}|${limits[*]}")
                fi
                for cand in "${candidates[@]}"; do
                    # shellcheck disable=SC2086  # each half is a list of words
                    if try_start ${cand%%|*} -- ${cand#*|}; then
                        found=$cand
                        break
                    fi
                    info "not with [${cand%%|*}] [${cand#*|}]: $(grep -v 'systemd' "$work/probe.log" | tail -1)"
                done
                [[ -n $found ]] || fail "podman cannot start a container here (see the errors above)"
                # shellcheck disable=SC2206
                global+=(${found%%|*})
                # shellcheck disable=SC2206
                run_extra+=(${found#*|})
                ok "yes, with global flags [${found%%|*}] and run/build flags [${found#*|}]"
            fi
            ;;
        *)
            # shellcheck disable=SC2206
            words=($SANDBOX_FLAGS)
            i=0
            while [[ $i -lt ${#words[@]} ]]; do
                if [[ ${words[$i]} == --runtime ]]; then
                    global+=("${words[$i]}" "${words[$((i + 1))]}")
                    i=$((i + 2))
                else
                    run_extra+=("${words[$i]}")
                    i=$((i + 1))
                fi
            done
            try_start -- "${run_extra[@]}" || fail "a container does not start with SANDBOX_FLAGS: $(tail -1 "$work/probe.log")"
            ok "yes, with SANDBOX_FLAGS=$SANDBOX_FLAGS"
            ;;
    esac
fi

# -- build ----------------------------------------------------------------------------------------
if [[ -z ${NO_BUILD:-} ]]; then
    step "build $IMAGE from $repo/Dockerfile (PYTHON_IMAGE=$PYTHON_IMAGE)"
    build=(build -t "$IMAGE" --build-arg "PYTHON_IMAGE=$PYTHON_IMAGE")
    if [[ $ENGINE == podman ]]; then
        build+=(--format docker "${run_extra[@]}")  # docker format: keeps the HEALTHCHECK
        ca=${BUILD_CA_FILE:-${PIP_CERT:-}}
        if [[ -n $ca && -f $ca ]]; then
            build+=(-v "$(realpath "$ca"):/run/crossfeed-build-ca.crt:ro" --build-arg PIP_CERT=/run/crossfeed-build-ca.crt)
            info "pip in the build trusts $ca (BUILD_CA_FILE)"
        fi
    elif [[ -n ${BUILD_CA_FILE:-} ]]; then
        info "BUILD_CA_FILE is ignored with docker (docker build cannot mount a file)"
    fi
    # shellcheck disable=SC2206
    build+=(${BUILD_ARGS:-})
    start=$SECONDS
    if ! engine "${build[@]}" "$repo" >"$work/build.log" 2>&1; then
        sed 's/^/    | /' "$work/build.log" | tail -40
        fail "the build failed"
    fi
    ok "built in $((SECONDS - start)) s"
fi
size=$(engine image inspect --format '{{.Size}}' "$IMAGE") || fail "no image $IMAGE"
ok "$IMAGE: $((size / 1000000)) MB"
if engine run --rm "${run_extra[@]}" --entrypoint python3 "$IMAGE" -c 'import pip' >/dev/null 2>&1; then
    fail "pip is importable in the image"
fi
ok "no pip in the image"

# -- fake upstream --------------------------------------------------------------------------------
step "fake upstream (deploy/fake_upstream.py)"
# bridge: on every address, since the container comes from the engine's bridge; host: loopback only
bind=0.0.0.0
[[ $NETWORK == host ]] && bind=127.0.0.1
python3 "$here/fake_upstream.py" --host "$bind" --port 0 >"$work/upstream.out" 2>"$work/upstream.err" &
upstream_pid=$!
for _ in $(seq 50); do
    grep -q 'listening on' "$work/upstream.out" 2>/dev/null && break
    kill -0 "$upstream_pid" 2>/dev/null || fail "the fake upstream exited: $(cat "$work/upstream.err")"
    sleep 0.1
done
upstream_port=$(sed -n 's/.*listening on .*:\([0-9][0-9]*\)$/\1/p' "$work/upstream.out")
[[ -n $upstream_port ]] || fail "the fake upstream did not start"
ok "pid $upstream_pid, port $upstream_port"

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# -- one run of the image -------------------------------------------------------------------------
net_flags=()
if [[ $NETWORK == host ]]; then
    upstream_url=http://127.0.0.1:$upstream_port/v1
elif [[ $ENGINE == podman ]]; then
    upstream_url=http://host.containers.internal:$upstream_port/v1
else
    upstream_url=http://host.docker.internal:$upstream_port/v1
    net_flags=(--add-host=host.docker.internal:host-gateway)
fi

start_container() {  # start_container NAME PORT FLAGS... [-- SERVE_ARGS...]: runs it detached
    local name=$1 port=$2 flags=() args=()
    shift 2
    while [[ $# -gt 0 && $1 != -- ]]; do flags+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    args=("$@")
    local publish=(-p "127.0.0.1:$port:8080")
    [[ $NETWORK == host ]] && publish=(--network=host -e "CROSSFEED_PORT=$port")
    containers+=("$name")
    engine run -d --name "$name" "${run_extra[@]}" "${net_flags[@]}" "${publish[@]}" \
        -e "CROSSFEED_UPSTREAM=$upstream_url" "${flags[@]}" "$IMAGE" "${args[@]}" >/dev/null \
        || fail "$name: the container did not start"
}

logs_and_fail() {  # logs_and_fail NAME MESSAGE
    info "--- logs of $1:"
    engine logs "$1" 2>&1 | tail -30 | sed 's/^/    | /'
    fail "$1: $2"
}

wait_healthz() {  # wait_healthz NAME PORT
    local name=$1 port=$2
    for _ in $(seq 100); do
        if curl -fsS --max-time 2 "http://127.0.0.1:$port/healthz" >"$work/healthz" 2>/dev/null; then
            ok "GET /healthz: $(cat "$work/healthz")"
            return 0
        fi
        [[ $(engine inspect --format '{{.State.Running}}' "$name" 2>/dev/null) == true ]] \
            || logs_and_fail "$name" "exited before /healthz answered"
        sleep 0.3
    done
    logs_and_fail "$name" "/healthz did not answer within 30 s"
}

check_healthcheck() {  # the image's own HEALTHCHECK command
    local name=$1
    if [[ $ENGINE == podman ]]; then
        engine healthcheck run "$name" >/dev/null 2>&1 || logs_and_fail "$name" "the image's HEALTHCHECK failed"
        ok "the image's HEALTHCHECK passes (podman healthcheck run)"
    else
        for _ in $(seq 60); do
            status=$(engine inspect --format '{{.State.Health.Status}}' "$name")
            [[ $status == healthy ]] && { ok "the image's HEALTHCHECK: healthy"; return 0; }
            [[ $status == unhealthy ]] && logs_and_fail "$name" "the image's HEALTHCHECK: unhealthy"
            sleep 1
        done
        logs_and_fail "$name" "the HEALTHCHECK did not report healthy within 60 s"
    fi
}

check_stream() {  # check_stream NAME PORT [KEY]: a streamed POST /v1/responses, then GET it back
    local name=$1 port=$2 key=${3:-} body=$work/$1.sse auth=()
    [[ -n $key ]] && auth=(-H "Authorization: Bearer $key")
    curl -sS -N --max-time 60 "http://127.0.0.1:$port/v1/responses" -H 'Content-Type: application/json' \
        "${auth[@]}" -d "{\"model\":\"$MODEL\",\"input\":\"Say hi\",\"stream\":true}" >"$body" \
        || logs_and_fail "$name" "POST /v1/responses failed"
    python3 - "$body" >"$work/$name.check" 2>&1 <<'EOF' || { sed 's/^/    | /' "$work/$name.check"; logs_and_fail "$name" "the stream is not what it should be"; }
import json, sys
events = []
for frame in open(sys.argv[1], encoding="utf-8").read().split("\n\n"):
    lines = [line for line in frame.splitlines() if line]
    if not lines:
        continue
    name = next((line[7:] for line in lines if line.startswith("event: ")), None)
    data = "\n".join(line[6:] for line in lines if line.startswith("data: "))
    events.append((name, json.loads(data) if data else None))
names = [n for n, _ in events]
print("events:", " ".join(names))
assert names and names[0] == "response.created", "the first event is not response.created"
assert names[-1] == "response.completed", "the last event is not response.completed"
text = "".join(d.get("delta", "") for n, d in events if n == "response.output_text.delta")
assert text == "Hello from the fake upstream.", f"the text is {text!r}"
response = events[-1][1]["response"]
assert response["status"] == "completed", response["status"]
print(response["id"])
EOF
    local n events_line response_id
    events_line=$(head -1 "$work/$name.check")
    n=$(wc -w <<<"${events_line#events: }")
    response_id=$(tail -1 "$work/$name.check")
    ok "POST /v1/responses (stream): $n events, response.created ... response.completed, text from the upstream"
    curl -fsS --max-time 10 "${auth[@]}" "http://127.0.0.1:$port/v1/responses/$response_id" >"$work/$name.get" \
        || logs_and_fail "$name" "GET /v1/responses/$response_id failed (the store did not keep it)"
    grep -q "\"$response_id\"" "$work/$name.get" || logs_and_fail "$name" "GET /v1/responses/$response_id: another body"
    ok "GET /v1/responses/$response_id: stored and read back"
}

check_stop() {  # SIGTERM through the engine: exit code 0
    local name=$1 code
    engine stop --time 30 "$name" >/dev/null || fail "$name: $ENGINE stop failed"
    code=$(engine inspect --format '{{.State.ExitCode}}' "$name")
    [[ $code == 0 ]] || logs_and_fail "$name" "exit code $code after $ENGINE stop (SIGTERM), not 0"
    engine logs "$name" 2>&1 | grep -q '"server.stopped"' || logs_and_fail "$name" "no server.stopped in its log"
    ok "$ENGINE stop (SIGTERM): exit code 0, server.stopped logged"
}

check_auth() {  # check_auth NAME PORT: no key and a wrong key get 401 before anything else
    local name=$1 port=$2 code auth
    for auth in "" "Authorization: Bearer not-the-key"; do
        code=$(curl -sS -o "$work/$name.401" -w '%{http_code}' --max-time 10 ${auth:+-H "$auth"} \
            -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/responses" \
            -d "{\"model\":\"$MODEL\",\"input\":\"Say hi\",\"stream\":true}") \
            || logs_and_fail "$name" "POST /v1/responses ${auth:+with a wrong key }did not answer"
        [[ $code == 401 ]] \
            || logs_and_fail "$name" "POST /v1/responses ${auth:-without a key}: HTTP $code, not 401: $(head -c 300 "$work/$name.401")"
    done
    ok "POST /v1/responses without the key, and with a wrong one: 401"
}

after_start() {  # after_start LABEL NAME PORT [KEY]: every check of a running container, then stop
    local label=$1 name=$2 port=$3 key=${4:-} code
    wait_healthz "$name" "$port"
    ok "runs as $(engine exec "$name" python3 -c 'import os; print("uid %d, gid %d" % (os.getuid(), os.getgid()))')"
    check_healthcheck "$name"
    [[ -n $key ]] && check_auth "$name" "$port"
    check_stream "$name" "$port" "$key"
    engine exec "$name" python3 -c 'import os; assert os.path.getsize("/var/lib/crossfeed/responses.sqlite3") > 0' \
        || logs_and_fail "$name" "no SQLite store in /var/lib/crossfeed"
    ok "the SQLite store is in /var/lib/crossfeed"
    if [[ $label == workers ]]; then
        engine logs "$name" 2>&1 | grep -q "(2 workers)" || logs_and_fail "$name" "no startup line with 2 workers"
        ok "the startup line says 2 workers"
    fi
    if [[ $label == compose ]]; then  # deploy/crossfeed.toml: metrics_port = 9464, not published
        code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$port/metrics") || code=none
        [[ $code == 404 ]] || logs_and_fail "$name" "GET /metrics on the published port: HTTP $code, not 404"
        engine exec "$name" python3 -c 'import urllib.request; body = urllib.request.urlopen("http://127.0.0.1:9464/metrics", timeout=5).read(); assert b"crossfeed_requests_total" in body' \
            || logs_and_fail "$name" "no /metrics on port 9464 inside the container"
        ok "GET /metrics: 404 on the published port, served on 9464 inside the container"
    fi
    check_stop "$name"
}

run_checks() {  # run_checks LABEL [--key KEY] FLAGS... [-- SERVE_ARGS...]
    local label=$1 name port key=
    shift
    if [[ ${1:-} == --key ]]; then
        key=$2
        shift 2
    fi
    name=crossfeed-smoke-$$-$label
    port=$(free_port)
    step "run $label: ${*:-(as built)}"
    start_container "$name" "$port" "$@"
    info "container $name, upstream $upstream_url, port 127.0.0.1:$port"
    after_start "$label" "$name" "$port" "$key"
}

run_checks default
run_checks read-only --read-only --tmpfs /tmp --tmpfs /var/lib/crossfeed
run_checks hardened --read-only --tmpfs /tmp --tmpfs /var/lib/crossfeed --user 12345 --cap-drop ALL \
    --security-opt no-new-privileges
run_checks workers --read-only --tmpfs /tmp --tmpfs /var/lib/crossfeed -e CROSSFEED_WORKERS=2

# e. The settings of deploy/docker-compose.yml's crossfeed service, flag for flag (the store's named
# volume is the image's own volume here; tests/test_deploy_files.py checks both files agree).
compose_key=smoke-compose-$(python3 -c 'import secrets; print(secrets.token_hex(12))')
compose_flags=(
    -v "$here/crossfeed.toml:/etc/crossfeed/config.toml:ro"
    -e "CROSSFEED_INBOUND_KEYS=$compose_key"
    -e CROSSFEED_LOG_LEVEL=info
    --read-only --tmpfs /tmp
    --security-opt no-new-privileges:true
)
compose_args=(--config /etc/crossfeed/config.toml)
run_checks compose --key "$compose_key" "${compose_flags[@]}" -- "${compose_args[@]}"

# f. The read-only example of deploy/README.md for this engine, as written there.
readme_example() {  # readme_example NAME PORT: its words, NUL-separated; the line as written in $work/readme.cmd
    python3 - "$here/README.md" "$ENGINE" "$1" "$2" "$upstream_port" "$IMAGE" "$work/readme.cmd" "${run_extra[@]}" <<'PY'
import shlex, sys

readme, engine, name, port, upstream_port, image, written, *extra = sys.argv[1:]
lines = open(readme, encoding="utf-8").read().splitlines()
prefix = f"{engine} run --rm -p 127.0.0.1:8080:8080 --read-only "
starts = [i for i, line in enumerate(lines) if line.strip().startswith(prefix)]
if len(starts) != 1:
    sys.exit(f"{readme}: {len(starts)} examples start with `{prefix}...`, expected 1")
i = starts[0]
command = lines[i].strip()
while command.endswith("\\"):
    i += 1
    command = command[:-1] + " " + lines[i].strip()
command = " ".join(command.split())
open(written, "w", encoding="utf-8").write(command + "\n")
words = shlex.split(command)


def swap(old, new):
    hits = [k for k, word in enumerate(words) if old(word)]
    if len(hits) != 1:
        sys.exit(f"the example `{command}`: {len(hits)} words to replace, expected 1")
    words[hits[0] : hits[0] + 1] = new(words[hits[0]])


swap(lambda w: w == "--rm", lambda w: ["-d", "--name", name, *extra])  # and this machine's sandbox flags
swap(lambda w: w == "127.0.0.1:8080:8080", lambda w: [f"127.0.0.1:{port}:8080"])
swap(lambda w: ":8000/v1" in w, lambda w: [w.replace(":8000/v1", f":{upstream_port}/v1")])
if words[:2] != [engine, "run"] or words[-1] != "crossfeed":
    sys.exit(f"the example `{command}` is not `{engine} run ... crossfeed`")
words[-1] = image
sys.stdout.write("\0".join(words[1:]) + "\0")  # not words[0], the engine: engine() adds its global flags
PY
}
if [[ $NETWORK == host ]]; then
    step "run readme: skipped (NETWORK=host; the example publishes a port)"
else
    name=crossfeed-smoke-$$-readme
    port=$(free_port)
    step "run readme: the read-only example of deploy/README.md for $ENGINE"
    readme_words=()
    while IFS= read -r -d '' word; do readme_words+=("$word"); done < <(readme_example "$name" "$port")
    [[ ${#readme_words[@]} -gt 2 ]] || fail "the read-only example of deploy/README.md for $ENGINE could not be read"
    info "as written: $(cat "$work/readme.cmd")"
    info "run as:     $ENGINE ${readme_words[*]}"
    readme_key=smoke-readme-$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    containers+=("$name")
    CROSSFEED_INBOUND_KEYS=$readme_key engine "${readme_words[@]}" >/dev/null \
        || fail "$name: the README's example did not start"
    info "container $name, port 127.0.0.1:$port, CROSSFEED_INBOUND_KEYS set in the environment"
    after_start readme "$name" "$port" "$readme_key"
fi

step "run unwritable: --user 12345:12345 and no writable data directory"
name=crossfeed-smoke-$$-unwritable
start_container "$name" "$(free_port)" --read-only --user 12345:12345
code=$(engine wait "$name" 2>/dev/null | tail -1)
message=$(engine logs "$name" 2>&1 | grep -v systemd | tail -1)
info "exit code $code: $message"
[[ $code == 2 ]] || logs_and_fail "$name" "exit code $code, expected 2 (refusal at start-up)"
[[ $message == *"cannot be created or written by this process (uid 12345"* && $message == *"mount a writable volume"* ]] \
    || logs_and_fail "$name" "not the plain unwritable-directory message"
ok "refused at start-up with the plain message (uid, path, fix)"
