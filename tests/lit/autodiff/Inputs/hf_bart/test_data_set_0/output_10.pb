 B*model.model.encoder.layers.0.fc2.bias_gradJ€¥Â
9Š¹ğ ¸V‚¹Ú8úä¡9DM¤8a¥Š8ÇF”¹ş[x¹ìös7ò¡'9'âa¸ÂÊ¸#'Ÿ9aP8óI¸~‰Æ¸*É9·œ9Uÿ29ïÊÁ¸"W1¸.Ì¹@C‡¹ßgj¹<‚«8ı«¶¹,ù§8ĞÔs8ÕŒ­·Yô³9