//! The examples in `native/examples/`, each run for a few steps through its `run` function (the
//! example files are included as modules; their `main` only parses the command line).

#[allow(dead_code)]
#[path = "../examples/csv_regression.rs"]
mod csv_regression;
#[allow(dead_code)]
#[path = "../examples/custom_loop.rs"]
mod custom_loop;
#[allow(dead_code)]
#[path = "../examples/custom_op/main.rs"]
mod custom_op;
#[allow(dead_code)]
#[path = "../examples/image_folder.rs"]
mod image_folder;

use kiln::data::loader::Dataset;

fn args(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

fn have_mnist() -> bool {
    let found = kiln::data::mnist::data_dir(None).is_ok_and(|d| d.is_dir());
    if !found {
        eprintln!("skipped: no MNIST data");
    }
    found
}

#[test]
fn custom_loop_loss_falls_and_it_learns() {
    if !have_mnist() {
        return;
    }
    let r = custom_loop::run(&args(&["--steps", "150", "--test-limit", "2000"])).unwrap();
    assert_eq!(r.losses.len(), 10, "{r:?}");
    let (first, last) = (r.losses[0].1, r.losses[9].1);
    assert!(last < 0.6 * first, "loss {first} -> {last}");
    assert!(r.test_accuracy > 0.8, "{r:?}");
}

#[test]
fn custom_op_trains_like_the_built_in_ops() {
    let r = custom_op::run(&args(&["--steps", "30"])).unwrap();
    assert_eq!(r.custom.len(), 30);
    // run checks the two agree at every step; the loss must also fall
    let (first, last) = (r.custom[0], r.custom[29]);
    assert!(last < 0.9 * first, "loss {first} -> {last}");
}

#[test]
fn csv_regression_beats_predicting_the_mean() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("houses.csv");
    let log = dir.path().join("log.jsonl");
    let r = csv_regression::run(&args(&[
        "--steps",
        "100",
        "--out",
        csv.to_str().unwrap(),
        "--log",
        log.to_str().unwrap(),
    ]))
    .unwrap();
    assert!(r.rmse < 0.5 * r.price_std, "{r:?}");
    // The CSV it wrote has the quoted district names, and the log has the validation loss.
    let table = kiln::data::csv::CsvTable::read(&csv).unwrap();
    assert_eq!(table.len(), 2000);
    assert!((0..table.len()).any(|i| table.cell(i, 1) == Some("The \"Heights\"")));
    let log = kiln::learn::report::Log::read(&log).unwrap();
    assert!(
        log.evals
            .iter()
            .all(|e| e.metrics.contains_key("valid_loss"))
            && !log.evals.is_empty()
    );
}

#[test]
fn image_folder_trains_and_names_a_bad_file() {
    if have_mnist() {
        let dir = tempfile::tempdir().unwrap();
        let acc = image_folder::run(&args(&[
            "--steps",
            "40",
            "--train-per-class",
            "40",
            "--valid-per-class",
            "10",
            "--dir",
            dir.path().to_str().unwrap(),
        ]))
        .unwrap();
        assert!(acc > 0.5, "validation accuracy {acc}");
        assert!(dir.path().join("train/7/0039.png").is_file());
    }

    // Without MNIST: two classes of drawn images, one file corrupted.
    let dir = tempfile::tempdir().unwrap();
    for (class, value) in [("cat", 40u8), ("dog", 200)] {
        std::fs::create_dir_all(dir.path().join(class)).unwrap();
        for n in 0..2 {
            let path = dir.path().join(format!("{class}/{n}.png"));
            image_folder::write_png(&path, &[value; 28 * 28], 28, 28).unwrap();
        }
    }
    std::fs::write(dir.path().join("notes.txt"), "not a class").unwrap();
    let folder = image_folder::ImageFolder::scan(dir.path(), 28, 28).unwrap();
    assert_eq!(folder.classes, ["cat", "dog"]);
    let b = folder.batch(&[3, 0], 0).unwrap();
    assert_eq!(b.labels, [1, 0]);
    assert!(b.pixels[0] > b.pixels[28 * 28]);
    let bad = dir.path().join("dog/1.png");
    let bytes = std::fs::read(&bad).unwrap();
    std::fs::write(&bad, &bytes[..bytes.len() / 2]).unwrap();
    let e = folder.batch(&[0, 3], 0).unwrap_err().to_string();
    assert!(
        e.starts_with("image folder: ") && e.contains("dog/1.png"),
        "{e}"
    );
    let small = image_folder::ImageFolder::scan(dir.path(), 14, 28).unwrap();
    let e = small.batch(&[0], 0).unwrap_err().to_string();
    assert!(
        e.contains("cat/0.png: expected a 14x28 image, found 28x28"),
        "{e}"
    );
    let e = image_folder::ImageFolder::scan(&dir.path().join("cat"), 28, 28).unwrap_err();
    assert!(
        e.to_string().contains("found 0 class folders and no PNG"),
        "{e}"
    );
}
