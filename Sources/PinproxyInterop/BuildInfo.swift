import CPinproxyBuild

/// What this binary was built from: pinproxy's version, and the commit and its date when the
/// build was given them (scripts/build-info does; a plain `swift build` is not). `--version`
/// prints `versionLine`; the values are public for whatever else reports the build.
public enum BuildInfo {
    public static let version = "0.2.0"
    /// The abbreviated commit hash (`-dirty` when the tree had uncommitted changes); nil
    /// for a build outside git.
    public static let commit: String? = given(pp_build_commit())
    /// The commit's date (YYYY-MM-DD, UTC), or SOURCE_DATE_EPOCH's when that was set.
    public static let commitDate: String? = given(pp_build_commit_date())

    /// `pinproxy 0.2.0 (commit abcdef1, 2026-11-25)`, or `pinproxy 0.2.0 (commit unknown)`.
    public static var versionLine: String {
        guard let commit else { return "pinproxy \(version) (commit unknown)" }
        return "pinproxy \(version) (commit \(commit)" + (commitDate.map { ", \($0)" } ?? "") + ")"
    }

    private static func given(_ text: UnsafePointer<CChar>) -> String? {
        let value = String(cString: text)
        return value.isEmpty ? nil : value
    }
}
