# Sourced by the entrypoint (Docker) and by %environment (Apptainer); POSIX sh.
# NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME, when unset: exclude docker0, lo, veth, virbr and br-
# bridges if another interface exists (NCCL otherwise may bootstrap over docker0 and hang across
# nodes); use lo when it is the only interface, so a single-node job in a container without
# networking still runs. A value the user set is never changed.
if [ -z "${NCCL_SOCKET_IFNAME:-}" ] || [ -z "${GLOO_SOCKET_IFNAME:-}" ]; then
  _eb_first=""
  for _eb_if in $(ls /sys/class/net 2>/dev/null); do
    case "$_eb_if" in
      lo|docker*|veth*|virbr*|br-*) ;;
      *) [ -n "$_eb_first" ] || _eb_first="$_eb_if" ;;
    esac
  done
  if [ -n "$_eb_first" ]; then
    : "${NCCL_SOCKET_IFNAME:=^docker,lo,veth,virbr,br-}"
    : "${GLOO_SOCKET_IFNAME:=$_eb_first}"
  else
    : "${NCCL_SOCKET_IFNAME:=lo}"
    : "${GLOO_SOCKET_IFNAME:=lo}"
  fi
  export NCCL_SOCKET_IFNAME GLOO_SOCKET_IFNAME
  unset _eb_first _eb_if
fi
