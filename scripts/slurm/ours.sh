# Sourced by scripts/slurm/up and down.
# ours PIDFILE NAME: the daemon PIDFILE recorded still runs. A pid file outlives its daemon when
# the machine restarts or a session's processes are killed, and its pid may be another program's
# by then, so the program's name is checked too; and a killed daemon nobody has reaped yet (a
# zombie) answers `kill -0` but runs no more.
ours() {
    local pid stat name
    pid=$(cat "$1" 2>/dev/null) && [[ $pid =~ ^[0-9]+$ ]] || return 1
    read -r stat name < <(ps -o stat=,comm= -p "$pid" 2>/dev/null) || return 1
    [[ $name == "$2" && $stat != Z* ]]
}
