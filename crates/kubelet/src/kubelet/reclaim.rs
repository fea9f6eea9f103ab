//! The eviction manager's node-level disk reclaim, backed by the image and container garbage
//! collectors (upstream wires `ImageGC` and `ContainerGC` into `eviction.NewManager` the same
//! way). Kept here, at the wiring level, so `eviction/` depends on neither collector.

use futures::future::BoxFuture;

use crate::eviction::NodeReclaim;
use crate::images::ImageGcHandle;
use crate::runtime::ContainerGcHandle;

/// Both collectors' handles, called through [`NodeReclaim`].
pub(super) struct GcReclaim {
    pub images: ImageGcHandle,
    pub containers: ContainerGcHandle,
}

impl NodeReclaim for GcReclaim {
    fn delete_unused_images(&self) -> BoxFuture<'_, Result<u64, String>> {
        Box::pin(async move {
            self.images
                .delete_unused_images()
                .await
                .map_err(|e| e.to_string())
        })
    }

    fn delete_all_unused_containers(&self) -> BoxFuture<'_, Result<(), String>> {
        Box::pin(async move {
            self.containers
                .delete_all_unused_containers()
                .await
                .map_err(|e| e.to_string())
        })
    }
}
