//! virtio-blk: a disk image file as the guest's block device, one request queue. The sandbox's
//! root filesystem is such a disk, read-only: the ext4 image the daemon builds once per
//! prepared rootfs and shares between sandboxes.

mod device;
mod request;

pub use device::Block;
pub use request::{BlockMetrics, SECTOR_SIZE};
