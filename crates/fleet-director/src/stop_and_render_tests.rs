//! What the director tells agents when jobs stop, and templates rendered before a deploy
//! changes anything, against the simulated cloud in virtual time.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use async_trait::async_trait;
use fleet_store::AsyncStore;

use super::model::{InstanceSpec, RenderedTemplates, Task, TaskState};
use super::sim::SimulationSettings;
use super::templates::{Renderer, TemplateError, TemplateInstance, rendered_blob_id};
use super::tests::{Fixture, deploy, failed, fixture, fixture_rendering, manifest};

async fn done(f: &Fixture, task: Result<Task, super::DirectorError>) {
    let task = f.director.wait(task.unwrap().id).await.unwrap();
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
}

fn sorted(mut kinds: Vec<String>) -> Vec<String> {
    kinds.sort();
    kinds
}

#[tokio::test(start_paused = true)]
async fn drains_are_told_whether_the_jobs_come_back_and_what_goes() {
    let f = fixture(vec![]).await;
    let d = manifest("d", 2, "1.0", 1024);
    assert_eq!(deploy(&f.director, &d).await.state, TaskState::Done);
    assert!(
        f.cloud.take_drain_kinds().is_empty(),
        "nothing ran to drain"
    );

    let port = d.replace("port: 80", "port: 81");
    assert_eq!(deploy(&f.director, &port).await.state, TaskState::Done);
    assert_eq!(
        sorted(f.cloud.take_drain_kinds()),
        ["d/web/0 update", "d/web/1 update"],
        "updated in place"
    );

    let disk = port.replace("persistent_disk: 1024", "persistent_disk: 2048");
    assert_eq!(deploy(&f.director, &disk).await.state, TaskState::Done);
    assert_eq!(
        sorted(f.cloud.take_drain_kinds()),
        [
            "d/web/0 shutdown keep/keep/keep",
            "d/web/1 shutdown keep/keep/keep"
        ],
        "a changing disk shuts the jobs down, the VM kept"
    );

    let stemcell = disk.replace("version: '1.0'", "version: '2.0'");
    assert_eq!(deploy(&f.director, &stemcell).await.state, TaskState::Done);
    assert_eq!(
        sorted(f.cloud.take_drain_kinds()),
        [
            "d/web/0 shutdown delete/keep/keep",
            "d/web/1 shutdown delete/keep/keep"
        ],
        "a new VM: the old one goes"
    );

    let smaller = stemcell.replace("instances: 2", "instances: 1");
    assert_eq!(deploy(&f.director, &smaller).await.state, TaskState::Done);
    assert_eq!(
        f.cloud.take_drain_kinds(),
        ["d/web/1 shutdown delete/delete/keep"],
        "a scaled-down instance goes with its VM"
    );

    done(&f, f.director.stop("d", false).await).await;
    assert_eq!(
        f.cloud.take_drain_kinds(),
        ["d/web/0 shutdown keep/keep/keep"]
    );
    done(&f, f.director.start("d").await).await;
    assert!(
        f.cloud.take_drain_kinds().is_empty(),
        "a stopped instance has nothing to drain when it starts"
    );
    done(&f, f.director.stop("d", true).await).await;
    assert_eq!(
        f.cloud.take_drain_kinds(),
        ["d/web/0 shutdown delete/keep/keep"]
    );
    done(&f, f.director.start("d").await).await;
    f.cloud.take_drain_kinds();
    done(&f, f.director.delete("d").await).await;
    assert_eq!(
        f.cloud.take_drain_kinds(),
        ["d/web/0 shutdown delete/delete/delete"]
    );
}

/// Renders an instance into a blob named for what it was given; fails for one index.
struct FakeRenderer {
    store: AsyncStore,
    fail_index: AtomicU32,
}

#[async_trait]
impl Renderer for FakeRenderer {
    async fn render(
        &self,
        spec: &InstanceSpec,
        instance: &TemplateInstance,
    ) -> Result<Option<RenderedTemplates>, TemplateError> {
        if instance.index == self.fail_index.load(Ordering::SeqCst) {
            return Err(TemplateError::Failed(
                "nginx/conf.erb:1: Can't find property '[\"port\"]'".into(),
            ));
        }
        let text = format!(
            "{}:{:?}:{:?}",
            instance.id, spec.properties, instance.networks
        );
        let digest = fleet_release::sha1_hex(text.as_bytes());
        let blob = rendered_blob_id(&instance.deployment, &digest);
        let id = blob.clone();
        self.store
            .run(move |s| s.put_blob(&id, text.as_bytes()))
            .await
            .map_err(|e| TemplateError::Unavailable(e.to_string()))?;
        Ok(Some(RenderedTemplates {
            blob,
            configuration_hash: digest,
        }))
    }
}

#[tokio::test(start_paused = true)]
async fn templates_are_rendered_before_anything_changes_and_kept_while_in_use() {
    let store: Arc<dyn fleet_store::Store> = fleet_store::testing::store();
    let renderer = Arc::new(FakeRenderer {
        store: Arc::clone(&store).into(),
        fail_index: AtomicU32::new(u32::MAX),
    });
    let f = fixture_rendering(
        Arc::clone(&store),
        SimulationSettings::default(),
        Some(Arc::clone(&renderer) as Arc<dyn Renderer>),
    )
    .await;
    let rendered = || {
        let ids = store.blob_ids().unwrap();
        ids.iter().filter(|b| b.starts_with("rendered/d/")).count()
    };
    let d = manifest("d", 2, "1.0", 0);
    let task = deploy(&f.director, &d).await;
    assert_eq!(task.state, TaskState::Done, "{:?}", task.result);
    let steps: Vec<String> = f
        .director
        .events(task.id)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.task)
        .collect();
    assert!(
        steps.contains(&"Rendering templates".to_string()),
        "{steps:?}"
    );
    let instances = f.director.instances("d").await.unwrap();
    assert!(instances.iter().all(|i| {
        i.applied.as_ref().is_some_and(|a| {
            a.rendered
                .as_ref()
                .is_some_and(|r| r.blob.starts_with("rendered/d/"))
        })
    }));
    assert_eq!(rendered(), 2);

    let changed = d.replace("port: 80", "port: 81");
    assert_eq!(deploy(&f.director, &changed).await.state, TaskState::Done);
    assert_eq!(rendered(), 2, "the first deploy's files went once unused");

    // One instance cannot be rendered: nothing is stopped or changed, the error names it,
    // and what was rendered for the other goes with the failed deploy.
    renderer.fail_index.store(1, Ordering::SeqCst);
    let before = f.director.instances("d").await.unwrap();
    f.cloud.take_calls();
    let again = changed.replace("port: 81", "port: 82");
    let result = failed(&deploy(&f.director, &again).await);
    assert!(
        result.starts_with("Unable to render templates of 1 instance of deployment `d`")
            && result.contains("web/1 (")
            && result.contains("Can't find property"),
        "{result}"
    );
    let calls = f.cloud.take_calls();
    assert!(
        calls
            .iter()
            .all(|c| !c.starts_with("drain") && !c.starts_with("stop")),
        "{calls:?}"
    );
    assert_eq!(rendered(), 2);
    assert_eq!(f.director.instances("d").await.unwrap(), before);

    done(&f, f.director.delete("d").await).await;
    assert_eq!(rendered(), 0, "nothing rendered outlives its deployment");
}
