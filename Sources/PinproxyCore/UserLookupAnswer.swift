/// How a lookup in the user database (`UserDatabase`) ended.
public enum UserLookupAnswer<Value: Sendable>: Sendable {
    case found(Value)
    /// The database has no such entry.
    case missing
    /// The database could not answer (`getpw*_r` failed with this errno).
    case failed(Int32)
}
