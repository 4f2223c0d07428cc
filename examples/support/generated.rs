//! The benches' large repository: source-like files of about 1 KiB, 100 to a directory.

use std::path::Path;

/// Writes `files` files `pkg<NNN>/src/file<NNNNN>.js` under `repo`, and a `.gitignore`
/// that ignores `node_modules/` (where the benches' setup step writes).
pub fn generate(repo: &Path, files: usize) -> std::io::Result<()> {
    for i in 0..files {
        let dir = repo.join(format!("pkg{:03}/src", i / 100));
        if i % 100 == 0 {
            std::fs::create_dir_all(&dir)?;
        }
        let mut body = String::with_capacity(1100);
        for line in 0..30 {
            body.push_str(&format!(
                "export const value_{i}_{line} = {};\n",
                i * 31 + line
            ));
        }
        std::fs::write(dir.join(format!("file{i:05}.js")), body)?;
    }
    std::fs::write(repo.join(".gitignore"), "node_modules/\n")
}
