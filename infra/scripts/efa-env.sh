# shellcheck shell=sh
# What NCCL needs to use EFA through the aws-ofi-nccl plugin, sourced before every process
# skyinfra starts on the node (as node-env.sh in the node folder; the user data writes it
# only when aws.efa = true). Without it NCCL silently falls back to TCP sockets.
#
# - FI_PROVIDER=efa: libfabric uses EFA only, never its TCP provider.
#   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html
# - The plugin and libfabric directories of the Deep Learning AMI (the plugin moved between
#   releases) go on LD_LIBRARY_PATH, so the NCCL bundled with torch or jaxlib finds the
#   plugin; only these directories: JAX's install docs warn against CUDA libraries there.
# - NCCL_NET_PLUGIN names the plugin by its file's suffix (libnccl-net-<suffix>.so); left
#   unset NCCL loads libnccl-net.so (aws-ofi-nccl src/Makefile.am). NCCL_DEBUG=INFO prints
#   "NET/OFI" when it is used.
export FI_PROVIDER=efa
for skyinfra_dir in /opt/amazon/ofi-nccl/lib /opt/amazon/aws-ofi-nccl/lib /opt/aws-ofi-nccl/lib /opt/amazon/efa/lib; do
    [ -d "$skyinfra_dir" ] || continue
    LD_LIBRARY_PATH="${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$skyinfra_dir"
    if [ -z "${NCCL_NET_PLUGIN:-}" ]; then
        if [ -e "$skyinfra_dir/libnccl-net-ofi.so" ]; then
            NCCL_NET_PLUGIN=ofi
        elif [ -e "$skyinfra_dir/libnccl-net-aws-ofi.so" ]; then
            NCCL_NET_PLUGIN=aws-ofi
        fi
    fi
done
unset skyinfra_dir
[ -z "${LD_LIBRARY_PATH:-}" ] || export LD_LIBRARY_PATH
[ -z "${NCCL_NET_PLUGIN:-}" ] || export NCCL_NET_PLUGIN
