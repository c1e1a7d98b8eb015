//! What an object being deleted still deletes, in the words of every kind's note.

/// "Being deleted: left to delete, in this order: …", with how every deletion reads AWS's
/// answers (`blockwork_runtime::Existence`); `left` in the order the controller deletes them.
pub fn left_to_delete(left: &[String]) -> String {
    if left.is_empty() {
        return "Being deleted: nothing is left to delete; the controller releases the object at its next look.".to_owned();
    }
    format!(
        "Being deleted: left to delete, in this order: {}. An answer that proves a thing gone (not found, a hosted zone that does not exist) counts as deleted; one that leaves it unknown (access denied, throttling, AWS errors) keeps the object, and after 5 minutes it says so (DeletionBlocked) with the two ways out.",
        left.join("; then ")
    )
}
